"""Labelled greetings of each kind of answer, as text, for the answer-detection corpus and the simulator.

Two sets with no text in common: ``TUNING`` (the detector's thresholds and phrase lists were set looking at
these) and ``HELD_OUT`` (never used to tune anything: the figures quoted for the detector come from it).
Each entry is (language, text). Speech is made from them at test/bench time with espeak-ng.
"""

from __future__ import annotations

TUNING: dict[str, list[tuple[str, str]]] = {
    "human": [
        ("en", "Hello?"), ("en", "Hi."), ("en", "Yeah, hello?"), ("en", "Hello, this is Mike."),
        ("en", "Good morning, Sarah speaking."), ("en", "Hello, who's calling?"), ("en", "Yes?"),
        ("en", "Hi, this is Tom."), ("en", "Hello, Johnson residence."), ("sv", "Hallå?"), ("sv", "Hej, det är Anna."),
        ("sv", "Ja, hallå?"),
    ],
    "voicemail": [
        ("en", "Hi, you've reached Mike. I can't take your call right now, please leave a message after the tone."),
        ("en", "Hello, this is Sarah. I'm not available at the moment. Leave your name and number and I'll call you back."),
        ("en", "The person you are calling is not available. Please record your message after the tone. "
               "When you are finished, hang up."),
        ("en", "Hey, it's Tom. Sorry I missed you. Leave me a message and I will get back to you as soon as I can."),
        ("en", "You have reached the voicemail of Jennifer Adams. Please leave a brief message after the beep."),
        ("en", "Thanks for calling. I'm away from the phone right now, but if you leave a message I'll return your call."),
        ("en", "Hi, this is David. I'm either on the other line or away from my desk. Please leave a message."),
        ("en", "The number you have dialed is not available. At the tone, please record your message."),
        ("sv", "Hej, du har kommit till Anna. Jag kan inte svara just nu, lämna ett meddelande efter tonen."),
        ("sv", "Hej, det här är Erik. Jag är inte tillgänglig, lämna ett meddelande så ringer jag upp dig."),
    ],
    "screening": [
        ("en", "Hi, the person you're calling is using a screening service and will get a copy of this conversation. "
               "Go ahead and say your name and why you're calling."),
        ("en", "Hello, if you record your name and reason for calling, I'll see if this person is available."),
        ("en", "This call is being screened. Please state your name and the reason for your call."),
        ("en", "Hi there. Before I connect you, please say your name and what you're calling about."),
        ("en", "Hello, you are speaking with a call assistant. Who is calling, and what is this regarding? "
               "Please state your name."),
        ("en", "Thanks for calling. This phone screens calls from unknown numbers. Please state your name after the tone."),
        ("sv", "Hej, samtalet granskas. Säg ditt namn och vad ditt samtal gäller."),
        ("sv", "Hej, innan jag kopplar dig vidare, säg ditt namn och ditt ärende."),
    ],
    "ivr": [
        ("en", "Thank you for calling Acme Insurance. For claims, press 1. For billing, press 2. "
               "For all other questions, press 0."),
        ("en", "Welcome to City Medical. Para español, oprima dos. Please listen carefully as our menu options have changed."),
        ("en", "Thank you for calling. Your call is important to us. Please hold for the next available representative."),
        ("en", "You have reached Northwind Bank. If you know your party's extension, please dial it now. "
               "For the main menu, press star."),
        ("en", "Hello and welcome to Contoso support. To speak with a technician, press one. "
               "To check an order, press two."),
        ("en", "Thanks for calling Globex. Please say or press the number of the department you want."),
        ("sv", "Välkommen till kundtjänst. Tryck ett för fakturor, tryck två för support."),
        ("sv", "Tack för att du ringer. Ditt samtal är viktigt för oss, vänligen vänta."),
    ],
}

HELD_OUT: dict[str, list[tuple[str, str]]] = {
    "human": [
        ("en", "Hello."), ("en", "Hey."), ("en", "Hi, who is this?"), ("en", "Hello, Jessica here."),
        ("en", "Speaking."), ("en", "Yep, hello?"), ("en", "Hi, it's Paul."), ("en", "Good afternoon."),
        ("en", "Hello, may I ask who's calling?"), ("en", "This is Karen."), ("en", "Uh, hello?"),
        ("en", "Hi, Mark speaking."), ("en", "Hello, the Miller house."), ("en", "Yeah, what's up?"),
        ("sv", "Hej."), ("sv", "Hallå, det är Per."), ("sv", "Ja, det är Lisa."), ("sv", "God morgon."),
        ("sv", "Hallå, vem är det?"), ("sv", "Hej, Johan här."),
    ],
    "voicemail": [
        ("en", "Hi, you've reached Laura. I'm unable to answer right now. Please leave your message after the beep."),
        ("en", "Hello, this is Robert Chen. I'm out of the office this week. Leave a message and I'll get back to you."),
        ("en", "Hey, this is Jake. Can't talk right now. You know what to do at the beep."),
        ("en", "The mobile subscriber you have called is unavailable. Please leave a message after the tone."),
        ("en", "Hi, you've reached the Garcia family. We can't come to the phone right now. Please leave a message."),
        ("en", "This is Emily. I'm probably driving or in a meeting. Leave your name, number, and a short message."),
        ("en", "Your call has been forwarded to an automatic voice message system. The person is not available."),
        ("en", "Hello, you have reached the office of Doctor Patel. The office is closed. Please leave a message "
               "with your name and phone number."),
        ("en", "Hi, it's Chris. I'm not here right now. Please leave a message and I'll call you back later today."),
        ("en", "Good day, you've reached Michelle at Bright Homes. I'm with a client. Leave your details after the tone."),
        ("en", "Hello. Nobody is available to take your call. Please leave a message after the beep. Thank you."),
        ("en", "Hi, you've reached Sam's cell. I cannot take your call at the moment. Leave me a message."),
        ("en", "This is the voicemail box of Andrew Smith. Please leave a detailed message and I will return your call."),
        ("en", "Sorry we missed your call. Leave a message at the tone and we'll get back to you as soon as possible."),
        ("sv", "Hej, det här är Maria. Jag kan inte ta ditt samtal just nu. Lämna ett meddelande efter pipet."),
        ("sv", "Du har kommit till Lars röstbrevlåda. Tala in ditt meddelande efter tonen."),
        ("sv", "Hej, Karin här. Jag är upptagen, lämna meddelande så ringer jag tillbaka."),
        ("sv", "Abonnenten du söker är inte tillgänglig. Lämna ett meddelande efter tonen."),
    ],
    "screening": [
        ("en", "Hi, this person is using call screening. Please say your name and the reason for your call."),
        ("en", "Hello. Your call is being screened by an automated assistant. What is your name, and why are you calling?"),
        ("en", "Hi, I'm an assistant for this number. Please tell me your name and what you are calling about."),
        ("en", "The person you are trying to reach screens calls from unknown numbers. Please state your name and purpose."),
        ("en", "Hello, this is a virtual assistant. May I ask who is calling and the reason for calling?"),
        ("en", "Hi, before your call goes through, please record your name and why you're calling after the tone."),
        ("en", "Thanks for calling. Just say your name and what this call is about, and I'll see if they're available."),
        ("en", "Hello, the person you're calling uses a screening service. Go ahead and state your name."),
        ("en", "Hi, this call is being screened for spam. Please say your name and your reason for calling."),
        ("en", "This is an automated assistant. To be connected, please say your full name and why you are calling."),
        ("sv", "Hej, jag är en assistent. Säg ditt namn och ditt ärende, så ser jag om hon kan svara."),
        ("sv", "Samtalet granskas automatiskt. Vänligen säg ditt namn och vad samtalet gäller."),
        ("sv", "Hej, innan samtalet kopplas fram, säg ditt namn och ditt ärende efter tonen."),
        ("sv", "Det här numret granskar okända samtal. Säg ditt namn och vad ditt samtal gäller."),
    ],
    "ivr": [
        ("en", "Thank you for calling Blue Sky Airlines. For reservations, press 1. For baggage, press 2."),
        ("en", "Welcome to First National. For English, press one. Para español, oprima el dos."),
        ("en", "Hello, you've reached Sunrise Dental. If this is an emergency, hang up and dial 911. "
               "For appointments, press 1."),
        ("en", "Thanks for calling Metro Power. Please listen carefully, as our menu options have recently changed."),
        ("en", "Welcome to the service desk. Please enter or say your account number, followed by the pound key."),
        ("en", "Thank you for holding. All of our agents are busy. Your call is important to us, please stay on the line."),
        ("en", "You have reached Pinewood High School. To report an absence, press 1. For the main office, press 2."),
        ("en", "Welcome to Quick Pharmacy. To refill a prescription, press 1. To speak to a pharmacist, press 3."),
        ("en", "Hello, and thank you for calling Acme Hardware. For store hours and directions, press one."),
        ("en", "Thank you for calling the county clerk. For vehicle registration, press two. For marriage licenses, "
               "press three."),
        ("en", "You've reached Oak Street Apartments. For maintenance requests, press 1. For leasing, press 2."),
        ("sv", "Välkommen till Stadsbanken. För privatkunder, tryck ett. För företag, tryck två."),
        ("sv", "Tack för att du ringer Energibolaget. Alla våra handläggare är upptagna, vänligen vänta."),
        ("sv", "Välkommen till vårdcentralen. För tidsbokning, tryck ett. För provsvar, tryck två."),
    ],
}

CLASSES = ("human", "voicemail", "screening", "ivr")
